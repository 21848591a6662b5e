"""English closed-class words: the words that carry a sentence's form, not its content.

Articles, auxiliary and copular verbs, pronouns, prepositions, conjunctions and other
determiners. The contrastive methods' generation guard (guard.py) leaves a word of this class
to the with-context model: a contrast between the model with and without the context says
which *name* the context supports, and says nothing useful about "The" against a name, or
" is" against ",". The class is closed (no new members), so a fixed list is the whole of it;
it is English, like the built-in suites. Content words that happen to be frequent ("city",
"capital") are deliberately not in it.
"""

from __future__ import annotations

CLOSED_CLASS = frozenset((
    # articles and determiners
    "a", "an", "the", "this", "that", "these", "those", "each", "every", "some", "any", "no",
    "all", "both", "either", "neither", "such",
    # auxiliary, modal and copular verbs
    "is", "are", "was", "were", "be", "been", "being", "am", "has", "have", "had", "do",
    "does", "did", "will", "would", "shall", "should", "can", "could", "may", "might", "must",
    # pronouns
    "i", "me", "my", "we", "us", "our", "you", "your", "he", "him", "his", "she", "her", "it",
    "its", "they", "them", "their", "who", "whom", "whose", "which", "what", "there",
    # prepositions
    "of", "in", "on", "at", "to", "for", "by", "from", "with", "as", "into", "onto", "about",
    "over", "under", "between", "through", "during", "after", "before", "since", "until",
    "within", "without", "across", "against", "among", "upon", "per",
    # conjunctions and particles
    "and", "or", "but", "nor", "so", "yet", "if", "than", "then", "because", "while",
    "although", "though", "whether", "not",
))
