"""The canonical history model: records, decoding, stable JSON, tool atomic groups, validation."""
