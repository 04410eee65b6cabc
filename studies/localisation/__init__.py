"""Whether the explanations point at the keywords of generated texts (pointing game, top-k hit)."""
