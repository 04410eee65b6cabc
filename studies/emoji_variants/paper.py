"""The paper the study compares with: Anderson 2018 (ITAmoji, 25 emoji, Italian), its Table 3,
and the names it gives the attention variants. The study's table shows them beside jcaps'."""

PAPER = {  # Anderson 2018 (ITAmoji, 25 emoji, Italian), Table 3: macro-F1, micro-F1
    "none": (0.110, 0.319),
    "simplified": (0.106, 0.341),
    "local": (0.106, 0.341),
    "dot": (0.105, 0.339),
    "dot8": (0.113, 0.316),
    "local8": (0.106, 0.337),
    "simplified8": (0.109, 0.308),
}
PAPER_NAMES = {
    "none": "no attention",
    "simplified": "simplified attention",
    "local": "local attention",
    "dot": "1-head dot-product attention",
    "dot8": "8-head dot-product attention",
    "local8": "8-head local attention",
    "simplified8": "8-head simplified attention",
}
