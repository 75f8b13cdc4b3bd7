"""The tool's one exception: what was wrong with its input, said in one line (exit 2)."""


class DraftVocabError(Exception):
    pass
