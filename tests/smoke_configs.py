"""One `:smoke` config per model of the table (`jcaps.train.families.MODELS`): model name ->
(config file under configs/, argument). Each trains a few steps on generated data."""

SMOKE_CONFIGS = {
    "fasttext": ("fasttext_ag_news.py", "smoke"),
    "icapsnet_short": ("icapsnet_short_ag_news.py", "smoke"),
    "icapsnet_long": ("icapsnet_long_ag_news.py", "smoke"),
    "cccapsnet": ("cccapsnet_ag_news.py", "smoke"),
    "input_cell_lstm": ("input_cell_boxes.py", "earlier,input_cell,smoke"),
    "dilated_fcn": ("dilated_fcn_emoji.py", "smoke"),
    "br": ("br_reuters.py", "smoke"),
    "sgm": ("sgm_reuters.py", "smoke"),
}
