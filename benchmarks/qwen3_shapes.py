"""Qwen3's published shapes, shared by the GPU checks and the decode benchmark (one home: each
script imports them from here rather than from another script that imports it back)."""

QWEN3_VOCAB = 151_936
SHAPES = {  # Qwen3's published config.json values (vocabulary padded as theirs)
    "0.6b": dict(
        hidden_size=1024,
        num_hidden_layers=28,
        num_attention_heads=16,
        num_key_value_heads=8,
        head_dim=128,
        intermediate_size=3072,
    ),
    "1.7b": dict(
        hidden_size=2048,
        num_hidden_layers=28,
        num_attention_heads=16,
        num_key_value_heads=8,
        head_dim=128,
        intermediate_size=6144,
    ),
    "dry-run": dict(
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        intermediate_size=128,
    ),
}
