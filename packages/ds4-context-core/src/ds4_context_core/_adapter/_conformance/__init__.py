"""Implementation of the runtime-adapter conformance kit (public names live in ``conformance``)."""
