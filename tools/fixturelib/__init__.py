"""Helpers for tools/make_fixtures.py: presets, random-weight transformers models, tokenizer, references,
llama.cpp conversion / quantization / evaluation. Python from PyPI only; nothing here runs in CI."""
