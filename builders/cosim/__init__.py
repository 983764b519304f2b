"""COSIM-Q and COSIM-C: the pairing recipe on CoSIm (Kim, Zala, Bansal, NAACL 2022; VCR-Visor App. C)."""
