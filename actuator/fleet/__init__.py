"""A fleet: node agents that are the actuator's hands on each node, and the central
actuator's side of them (the wire format, the authenticated client, the agent directory)."""
