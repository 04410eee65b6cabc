"""The dilated causal CNN's attention variants on SemEval-2018 emoji, against the ITAmoji paper."""
