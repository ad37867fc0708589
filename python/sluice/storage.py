"""Explicit options for object stores (keys, endpoints, anonymous access).

Without them sluice finds credentials the way each cloud's SDK does (environment, profile
files, web identity, container and instance metadata; see docs/READING.md).
"""

from __future__ import annotations

from . import _native


def configure_storage(prefix: str, **options: str | bool) -> None:
    """Sets options for every store under ``prefix`` (``"s3://"`` for all S3 buckets,
    ``"s3://my-bucket"`` for one; a bucket's options override its scheme's).

    Keys are the clouds' own setting names without their prefix: S3 ``access_key_id``,
    ``secret_access_key``, ``session_token``, ``region``, ``endpoint``, ``role_arn``,
    ``profile``; GCS ``service_account_key``, ``application_credentials``, ``base_url``;
    Azure ``account_name``, ``account_key``, ``sas_key``, ``client_id``… plus
    ``anonymous=True`` to read a public bucket unsigned. Unknown keys raise ValueError.
    The options hold in this process: Ray workers read their own environment.

    >>> import sluice
    >>> sluice.configure_storage("s3://public-datasets", anonymous=True, region="us-west-2")
    """
    values = {k: ("true" if v is True else "false" if v is False else str(v)) for k, v in options.items()}
    _native.configure_storage(prefix, values)
