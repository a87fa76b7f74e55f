"""The runtime-adapter-v1 contract: types, capabilities, diagnostics and the conformance kit."""
