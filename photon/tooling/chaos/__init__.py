"""The chaos suite: faults injected into live pipelines, and the guarantees checked after."""
