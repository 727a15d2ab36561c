package model

// RDB format versions, as Valkey's src/rdb.h numbers them. Valkey 7.2 to 8.x write and load
// RDB 11, the last format shared with open-source Redis. Valkey 9 moved to numbers of its
// own (80 in 9.0, 81 in 9.2) so that they never collide with the formats other servers gave
// to 12 to 79; a Valkey server loads any version up to its own outside that range.
const (
	// RDBVersionRedisCompatible is RDB 11: what 7.2 to 8.x write, and what a 9.x server
	// sends over SYNC to a client that announces no version of its own, as the snapshot
	// stream does (a 9.1.2 stream starts REDIS0011, its own dump.rdb VALKEY080:
	// integration/TestRestoreFetch asserts both).
	RDBVersionRedisCompatible = 11
	// ForeignRDBVersionMin and ForeignRDBVersionMax bound the versions Valkey reserves for
	// formats it does not read: no Valkey loads them.
	ForeignRDBVersionMin = 12
	ForeignRDBVersionMax = 79
)

// rdbLoads is, per Valkey release from 7.2 on, the newest RDB version it loads (its own
// RDB_VERSION), oldest first.
var rdbLoads = []struct {
	major, minor, rdb int
}{
	{7, 2, 11},
	{8, 0, 11},
	{8, 1, 11},
	{9, 0, 80},
	{9, 1, 80},
	{9, 2, 81},
}

// MaxRDBVersion is the newest RDB format version a Valkey server of valkeyVersion ("8.0.1",
// "9.1") loads, and whether the version is one this table knows: a release from 7.2 to 9.2.
// An older or newer release, or an unreadable version, is not guessed at: a newer one may
// load more, and a restore should not be refused or attempted on a guess.
func MaxRDBVersion(valkeyVersion string) (int, bool) {
	major, minor, ok := parseMajorMinor(valkeyVersion)
	if !ok {
		return 0, false
	}
	for _, r := range rdbLoads {
		if r.major == major && r.minor == minor {
			return r.rdb, true
		}
	}
	return 0, false
}

// ForeignRDBVersion reports whether v is in the range Valkey reserves for other servers'
// formats, which no Valkey release loads.
func ForeignRDBVersion(v int) bool {
	return v >= ForeignRDBVersionMin && v <= ForeignRDBVersionMax
}
