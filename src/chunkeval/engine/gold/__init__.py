"""The gold set's life: made from documents by a chat model (`generate`, through `chat`), checked for what
makes its numbers unfair (`check`), placed in the corpus as it is now (`anchoring`) and corrected when the
corpus changes (`update`).
"""
