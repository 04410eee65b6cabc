"""How faithful each explanation method is to the trained models (comprehensiveness, sufficiency, AUCs)."""
