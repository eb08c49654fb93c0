package redis

// The one rule of the store's key layout: every key that one command or
// one Lua script touches carries the same hash tag, the part in braces, so
// that Redis Cluster keeps them in one slot (a script over keys of two
// slots fails with CROSSSLOT). A group's keys are built by tagged, as
// prefix + kind + ":{" + name + "}" + suffix, and differ only in the
// suffix:
//
//	idem:{key}, idem:{key}:lease       an idempotency record and its lease
//	log:{name}, log:{name}:m, …:lease  an event log's stream, state, lease
//	session:{scope}:name               a session variable (one key)
//	rate:{key}                         a rate allowance (one key)
//
// The prefix has no braces (Open refuses one), so the tag is the name's.
// Redis hashes a whole key whose first braces hold nothing, so a name that
// would leave the tag empty ("", or one starting with "}") is written with
// a "%" before it, as is one starting with "%", which keeps names apart.
// TestKeysShareASlot runs every script and command and checks each one's
// keys; the cluster's contract run would fail with CROSSSLOT.

// tagged is the key of kind's group for name, which its suffixes extend.
func (s *Store) tagged(kind, name string) string {
	if name == "" || name[0] == '}' || name[0] == '%' {
		name = "%" + name
	}
	return s.prefix + kind + ":{" + name + "}"
}
