package model

// BackupUser is the reserved ACL user a backup streams a server's snapshot as: it may run
// the replication protocol's client side for one snapshot (REPLCONF, SYNC) and nothing else,
// so its password opens no key, no channel, no configuration and no other command. Like the
// replication and exporter users it is on every cluster (RenderACL writes it, the live ACL
// keeps it), so a backup never waits for an ACL change and adding it rolled no node.
const BackupUser = "backup"

// BackupPassword derives the backup user's password from the operator password, as
// ReplicationPassword does with a label of its own: only the operator, which holds the
// operator password, can log in as it; no Secret key stores it; it rotates with the operator
// password by the same two phases and reveals nothing of it.
func BackupPassword(operatorPassword string) string {
	return derivePassword(operatorPassword, "valkey-operator/backup")
}

// backupAccess is what streaming a snapshot needs, proven against Valkey 8.0 and 9.1 by
// the integration suite: REPLCONF (capa eof, rdb-only) and SYNC. Not PSYNC (SYNC is what
// the stream sends), not PING. AUTH and HELLO need no grant: a server lets every user run
// them. No key and no channel: the snapshot is the server's own RDB, written by a forked
// child, not read through this user's key permissions, so ~ and & patterns would only open
// the data to whoever holds the password.
func backupAccess() aclPermRules {
	return aclPermRules{commands: []string{"-@all", "+replconf", "+sync"}}
}

// BackupLine is the backup user with the given password hashes (hex SHA-256, the login's
// first) as ACL SETUSER takes it after "reset" and the ACL file lists it after
// "user backup".
func BackupLine(hashes ...string) ACLLine {
	u := aclUserRules{name: BackupUser, hashes: hashes, root: backupAccess()}
	return ACLLine{User: u.name, Rules: u.tokens()}
}
