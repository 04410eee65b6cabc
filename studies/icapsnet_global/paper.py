"""The paper's model as the config knobs the study varies."""

# The iCapsNets knobs a candidate setting may change, at the values of the paper's model as the
# AG News config set it up before this study (its routing, attention and selection, Sec. II; one
# W_ij per pair, its Eq. 7; squashed primary capsules, a decision). A run whose config predates
# a knob trained with this value. The study's table names a study by the knobs its runs set otherwise.
BASELINE_KNOBS = {"conv_activation": "none", "attention_scale": False, "attention_logit_scale": 1.0,
                  "squash_primary": True, "shared_transform": False, "routing": "dynamic", "routing_iterations": 3,
                  "routing_similarity": "paper", "routing_logit_scale": 1.0, "routing_logit_scale_learned": False,
                  "routing_orphan": False, "capsule_selection": "coupling", "embedding_dropout": 0.5}
