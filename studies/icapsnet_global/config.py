"""The routing study's config: the shipped AG News config of iCapsNets Short
(configs/icapsnet_short_ag_news.py, same ARG) on the study's model, whose knobs start at the
paper's values (variants.py); a study run changes them with `--config.model.KNOB=VALUE`."""

import os

from jcaps.train import config as config_lib

SHIPPED = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, os.pardir, "configs",
                       "icapsnet_short_ag_news.py")


def get_config(arg=None):
    config = config_lib.load(SHIPPED + (f":{arg}" if arg else ""))
    config.model.name = "icapsnet_short_study"
    config.model.routing_logit_scale = 1.0
    config.model.routing_logit_scale_learned = False
    config.model.routing_orphan = False
    config.model.attention_logit_scale = 1.0
    return config
