"""Provider payload formats: OpenAI Chat, OpenAI Responses and Anthropic Messages."""
