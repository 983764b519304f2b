"""PMR-P: the pairing recipe on PMR (Dong et al., ACL 2022; VCR-Visor App. C)."""
