"""Memory domain core: key policy, working memory. No Django here."""
