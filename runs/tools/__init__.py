"""Built-in tools. Each module exposes ``contract()`` returning a ``ToolContract``, but
``corpus``: it loads the documents ``search_public`` reads (``manage.py load_documents``,
``load_demo``)."""
