"""Adapters that plug flashbox into other libraries' attention registries.

Each submodule registers itself when imported and needs that library (and torch) installed:

    import flashbox.integrations.transformers   # attn_implementation="flashbox" in Hugging Face transformers

`import flashbox.integrations` alone imports nothing else.
"""
