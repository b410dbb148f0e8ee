"""What the CLI, the agent and the audit share about this host's mcpnode state, below all three
(and below tuning, whose journal lives here):

    places.py      where state lives: the state directory and the tuning journal's path in it
    lock.py        the state lock: one flock every writer of the journal holds
    agentstate.py  what a running agent publishes (/run/mcpnode/agent.json)
    active.py      the answer to "which profile is this host tuned with" (the record; the
                   resolution reads the journal and lives in tuning/active.py)

The journal's format and logic stay in tuning/journal.py; only its place is named here.
"""
