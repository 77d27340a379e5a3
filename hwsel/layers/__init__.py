"""The prediction layers behind one `Layer` protocol (`hwsel.layers.base`), in the order they are
asked: ``measured``, ``registered``, ``roofline``, ``rules`` (this package re-exports nothing)."""
