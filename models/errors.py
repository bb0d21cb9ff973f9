"""Every exception engram raises on purpose, in one place, under one base class.

Callers catch `EngramError` to catch any of them; each room raises its own and the
edges translate them (the MCP layer into contract envelopes, the CLI into exit codes).
Where a class also derives from `ValueError`, code that validates input may catch it as
such.

    EngramError
    ├── ContractError            a failure the contract names (models.codes): an error envelope
    │   └── SecretRefused        SECRET_DETECTED, naming the rule that fired (service.secrets)
    ├── CanonicalizationRefused  a value JCS cannot canonicalise (also ValueError)
    ├── DeviceUnavailable        the named encoder device is not on this machine
    ├── SemanticUnavailable      the semantic channel cannot serve: RANKING_UNAVAILABLE
    ├── CorruptIndex             a scope's vector files are missing or do not check out
    ├── StoreUnavailable         the store could not serve; nothing was committed
    ├── CommitUncertain          the commit itself failed: the outcome is unknown
    ├── BackupUnsupported        this store is backed up with its database's own tools
    ├── SchemaTooNew             a newer release migrated the database
    ├── CorruptPacked            packed bytes that do not unpack (also ValueError)
    ├── SealBroken               a record's key is gone or its ciphertext does not authenticate
    ├── ContextUnavailable       no trusted host context for a call: JSON-RPC -32603
    ├── ConfigFileMissing        the named config file does not exist
    ├── ConfigFileInvalid        a client's config file is not a JSON object
    ├── DirectoryHeld            another process owns the data directory
    ├── ChannelAbsent            no server answers on the operator socket
    ├── OperatorFailure          the server ran an operator command and it failed
    ├── NoLiveReplica            a scope's target replica group has no live replica
    ├── RefusedRecord            a source document that cannot become a record (also ValueError)
    ├── LoadStopped              a load's batch sent after one that failed: not written
    └── EnrichError              LoCoMo's JSON and a BEIR conversation do not fit together (also ValueError)
"""

from __future__ import annotations

from pathlib import Path


class EngramError(Exception):
    """The base of every exception engram raises on purpose."""


# Contract and canonical forms
class CanonicalizationRefused(EngramError, ValueError):
    """The value cannot be canonicalised (NaN, -0, unsafe integer, lone surrogate...)."""


# Ranking
class DeviceUnavailable(EngramError):
    """A device was asked for by name and this machine does not have it."""


class SemanticUnavailable(EngramError):
    """The semantic channel cannot serve this request (reason in the message)."""


class CorruptIndex(EngramError):
    """A scope's vector files are missing, truncated or do not match their checksum."""


# Store
class StoreUnavailable(EngramError):
    """The store could not serve (locked, disk full, I/O error): nothing was committed."""


class CommitUncertain(EngramError):
    """The commit itself failed: the mutation may or may not be durable."""


class BackupUnsupported(EngramError):
    """This store is backed up with its database's own tools, not `engram admin backup`."""


class SchemaTooNew(EngramError):
    """The database was migrated by a newer release than this code."""

    def __init__(self, found: int, known: int) -> None:
        super().__init__(
            f"database schema version {found} is newer than this release knows ({known});"
            " upgrade engram before opening this database"
        )
        self.found = found
        self.known = known


class CorruptPacked(EngramError, ValueError):
    """Bytes that claim to be packed but do not unpack to a JSON object."""


# Engine
class SealBroken(EngramError):
    """The key is gone or the ciphertext does not authenticate."""


# Host binding and configuration
class ContextUnavailable(EngramError):
    """No trusted context for this call: answered as JSON-RPC -32603, never detailed."""

    code = -32603
    message = "Trusted invocation context unavailable"

    def __init__(self, reason: str = "") -> None:
        # The reason is for server-side debugging only; it never reaches the wire.
        super().__init__(self.message)
        self.reason = reason


class ConfigFileMissing(EngramError):
    """The named config file does not exist (a typo must not silently fall back)."""


class ConfigFileInvalid(EngramError):
    """The client's file exists but is not a JSON object; it is left untouched."""


# Operator surface
class DirectoryHeld(EngramError):
    """Another process (a server, or another admin command) owns the data directory."""

    def __init__(self, data_dir: Path) -> None:
        super().__init__(f"another engram process holds {data_dir}")
        self.data_dir = data_dir


class ChannelAbsent(EngramError):
    """No server answers on the data directory's operator socket."""


class OperatorFailure(EngramError):
    """The server ran the command and it failed (a contract code, or an internal fault)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


class NoLiveReplica(EngramError):
    """The target group has no live replica to project the scope."""


# Bulk ingestion
class RefusedRecord(EngramError, ValueError):
    """A source document that cannot become a record (empty, oversized, secret...)."""


class LoadStopped(EngramError):
    """A batch of a bulk load sent after one that failed: a load stops at its first
    failure, so it is not written."""


# Evaluation
class EnrichError(EngramError, ValueError):
    """LoCoMo's JSON and a conversation in BEIR layout do not fit together (no sample for
    the conversation, an unknown session, a date not in LoCoMo's form)."""
