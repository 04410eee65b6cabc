"""The shipped configs and the variants the docs compare them with, trained from scratch, with a TF-IDF bar."""
