"""What ranks and the engine say to each other: the event format, shared by both sides."""
