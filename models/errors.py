"""Every exception engram raises on purpose derives from `EngramError`, defined here.

Callers catch `EngramError` to catch any of them. The contract's own live here (models
is the contract in code); every other room's are defined in the module that raises
them, and the edges translate them (the MCP layer into contract envelopes, the CLI
into exit codes). Where a class also derives from `ValueError`, code that validates
input may catch it as such. The tree (kept whole by tests/deploy/test_errors.py):

    EngramError
    ├── ContractError            a failure the contract names: an error envelope (models.codes)
    │   └── SecretRefused        SECRET_DETECTED, naming the rule that fired (service.secrets.scanner)
    ├── CanonicalizationRefused  a value JCS cannot canonicalise, also ValueError (models.errors)
    ├── ContextUnavailable       no trusted host context for a call: JSON-RPC -32603 (models.errors)
    ├── DeviceUnavailable        the named encoder device is not on this machine (ranking.encoder)
    ├── SemanticUnavailable      the semantic channel cannot serve: RANKING_UNAVAILABLE (ranking.semantic)
    ├── CorruptIndex             a scope's vector files are missing or do not check out (ranking.semantic)
    ├── StoreUnavailable         the store could not serve; nothing was committed (service.store.base)
    ├── CommitUncertain          the commit itself failed: the outcome is unknown (service.store.base)
    ├── BackupUnsupported        this store is backed up with its database's own tools (service.store.base)
    ├── SchemaTooNew             a newer release migrated the database (service.store.migrations)
    ├── UnknownStoreScheme       a store URL no backend opens, also ValueError (service.store.address)
    ├── CorruptPacked            packed bytes that do not unpack, also ValueError (service.store.compact)
    ├── SealBroken               a record's key is gone or its ciphertext does not authenticate (service.engine.sealing)
    ├── NoLiveReplica            a scope's target replica group has no live replica (service.engine.routing)
    ├── ConfigFileMissing        the named config file does not exist (service.settings)
    ├── ConfigFileInvalid        a client's config file is not a JSON object (service.mcp.client_config)
    ├── DirectoryHeld            another process owns the data directory (service.operator.ownership)
    ├── ChannelAbsent            no server answers on the operator socket (service.operator.channel)
    ├── OperatorFailure          the server ran an operator command and it failed (service.operator.channel)
    ├── AttachRefused            the data directory's holder refused a stdio client's hello (service.mcp.bridge)
    ├── RefusedRecord            a source document that cannot become a record, also ValueError (index_data.records)
    ├── CorpusInvalid            a corpus file's line that is not a document, also ValueError (index_data.readers)
    ├── LoadStopped              a load's batch sent after one that failed: not written (index_data.writer)
    └── EnrichError              LoCoMo's JSON and a BEIR conversation do not fit, also ValueError (eval.locomo)
"""

from __future__ import annotations


class EngramError(Exception):
    """The base of every exception engram raises on purpose."""


# Contract and canonical forms
class CanonicalizationRefused(EngramError, ValueError):
    """The value cannot be canonicalised (NaN, -0, unsafe integer, lone surrogate...)."""


# Host binding
class ContextUnavailable(EngramError):
    """No trusted context for this call: answered as JSON-RPC -32603, never detailed."""

    code = -32603
    message = "Trusted invocation context unavailable"

    def __init__(self, reason: str = "") -> None:
        # The reason is for server-side debugging only; it never reaches the wire.
        super().__init__(self.message)
        self.reason = reason
