"""Cross-chain swaps: the destination leg followed after the source transaction is mined.

models.py    BridgeLeg
services.py  the leg opened, polled at LI.FI with backoff, its outcome and what staff see
mail.py      the e-mail when a leg ends
words.py     the leg in the user's words
public.py    the face: what the other rooms, the pages and the beat use
"""
