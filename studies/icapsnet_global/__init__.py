"""What iCapsNets' global interpretation (the capsule selected per class) reaches, per seed and per routing knob."""
