"""Operations: local servers (``tenantml up``/``down``, `servers`) and fault injection (`chaos`)."""
