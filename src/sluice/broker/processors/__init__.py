"""Request processors of the broker, one per concern; handler methods are named after request codes."""
