"""Privacy right before transport: policy and markers, the compiled walk, local-only routing."""
