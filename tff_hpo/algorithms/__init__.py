"""One module per algorithm; `registry.SPECS` lists them."""
