"""SGM's generated label sequences on Debian tags: decodings compared, errors by position."""
