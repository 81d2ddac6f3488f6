"""Platform fidelity: each target's launch run here the way its platform runs it."""
