"""VCR-Visor (the VCR-Visor paper): the pairing builder and its card (the VCR reader and the tag
rendering are shared: builders/sources/vcr.py, builders/text.py)."""
