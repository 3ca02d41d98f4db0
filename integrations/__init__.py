"""Bindings of the runtime into serving engines (``integrations.sglang``: SGLang's scheduler)."""
