"""The actuator's HTTP API, one blueprint per resource (alerts, cases, admin, health) and
one auth object they all answer to; `actuator.app.create_app` only assembles them."""
