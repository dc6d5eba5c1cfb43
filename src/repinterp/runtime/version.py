"""The version of repinterp, recorded in every manifest it writes (an index's, a trained
model's card, a build's shards, an evaluation's and an audit's results)."""

__all__ = ["VERSION"]

VERSION = "0.6.5"
