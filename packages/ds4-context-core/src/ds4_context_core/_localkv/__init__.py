"""Local KV prefix reuse: eligibility fingerprints, the runtime port and the controller."""
