package snapshot

// The restore-fetch init container's environment (`manager restore-fetch`): the operator
// renders a restoring primary's init container with these variables, and the command reads
// them. The keys come from the storage Secret through secretKeyRef and the CA as a mounted
// file, so nothing secret is in argv or the pod's annotations.
const (
	// EnvRestoreEndpoint is the object store's URL (http(s)://host[:port]).
	EnvRestoreEndpoint = "VALKEY_RESTORE_ENDPOINT"
	// EnvRestoreBucket is the bucket.
	EnvRestoreBucket = "VALKEY_RESTORE_BUCKET"
	// EnvRestoreRegion is the region to sign for; optional.
	EnvRestoreRegion = "VALKEY_RESTORE_REGION"
	// EnvRestoreObject is the shard's object key in full, as the manifest records it (no
	// prefix is added).
	EnvRestoreObject = "VALKEY_RESTORE_OBJECT"
	// EnvRestoreSHA256 is the object's SHA-256 in lowercase hex, from the manifest.
	EnvRestoreSHA256 = "VALKEY_RESTORE_SHA256"
	// EnvRestoreBytes is the object's size in bytes, from the manifest.
	EnvRestoreBytes = "VALKEY_RESTORE_BYTES"
	// EnvRestoreRDBVersion is the object's RDB version, from the manifest.
	EnvRestoreRDBVersion = "VALKEY_RESTORE_RDB_VERSION"
	// EnvRestoreMaxRDBVersion is the newest RDB version the pod's Valkey loads
	// (model.MaxRDBVersion of its version).
	EnvRestoreMaxRDBVersion = "VALKEY_RESTORE_MAX_RDB_VERSION"
	// EnvRestoreValkeyVersion is the image's Valkey version, for messages.
	EnvRestoreValkeyVersion = "VALKEY_RESTORE_VALKEY_VERSION"
	// EnvRestoreShard is the shard's index, for messages.
	EnvRestoreShard = "VALKEY_RESTORE_SHARD"
	// EnvRestoreAccessKey and EnvRestoreSecretKey are the store's credentials (secretKeyRef).
	EnvRestoreAccessKey = "VALKEY_RESTORE_ACCESS_KEY"
	EnvRestoreSecretKey = "VALKEY_RESTORE_SECRET_KEY"
	// EnvRestoreCAFile is the path of a mounted ca.crt to trust for an https endpoint;
	// optional.
	EnvRestoreCAFile = "VALKEY_RESTORE_CA_FILE"
	// EnvRestoreDir is the server's data directory (/data in pods).
	EnvRestoreDir = "VALKEY_RESTORE_DIR"
	// EnvRestoreAOFDir and EnvRestoreAOFFile are the server's appenddirname and
	// appendfilename, set (both) only when it runs with appendonly yes: the snapshot is then
	// placed as that AOF's base rather than as dump.rdb (snapshot.AOFLayout).
	EnvRestoreAOFDir  = "VALKEY_RESTORE_AOF_DIR"
	EnvRestoreAOFFile = "VALKEY_RESTORE_AOF_FILE"
	// EnvRestoreTerminationLog overrides where a failure's one-line message is written
	// (DefaultTerminationLog); for tests.
	EnvRestoreTerminationLog = "VALKEY_RESTORE_TERMINATION_LOG"
)

// DefaultTerminationLog is the file Kubernetes reads a container's termination message from
// (the pod's terminationMessagePath default).
const DefaultTerminationLog = "/dev/termination-log"
