package bolt

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"sort"

	"github.com/toolwire/toolwire/store/internal/record"
	bbolt "go.etcd.io/bbolt"
)

// Bounds in bytes. Without them a caller could fill the disk: finished
// detached batches' logs stay for batch_ttl and idempotency records (each
// a result of up to max_result_bytes) for idempotency_ttl, however many
// it makes.
//
// What the file holds is counted in the same transactions that change it,
// in boundsBucket, so a count is never ahead of or behind the file, and
// no write scans anything: each looks up what it replaces, adds the
// difference to the count, and evicts from the front of an index while
// the count is over its bound.
//
//   - records and variables: writtenBucket orders them by their last write
//     (a sequence number, big endian, to kind and key) and seqBucket finds
//     an entry's place in it (kind and key to the sequence number). Past
//     MaxBytes the least recently written go first, as in the memory store.
//   - event logs: logSizeBucket holds each log's size and, once it is
//     finished, its place in finishedBucket (a sequence number to the
//     log's name), which orders the finished logs as they finished. Past
//     MaxLogBytes the logs finished longest ago go first; a running log is
//     never dropped, nor the one finished last.
//
// Open checks the counts against a scan of the file (a file written before
// the counts existed, or by an older version since, has none or wrong
// ones) and rebuilds them when they differ.
var (
	boundsBucket   = []byte("bounds")
	writtenBucket  = []byte("written")
	seqBucket      = []byte("writeseq")
	logSizeBucket  = []byte("logsize")
	finishedBucket = []byte("finished")

	bytesKey    = []byte("bytes")
	logBytesKey = []byte("logbytes")
)

// Defaults of Options.MaxBytes and Options.MaxLogBytes: the memory
// store's, so that the two hold the same, and together, with the pages
// bbolt keeps free (the file settles about a quarter above what it holds),
// well within the 1 GiB volume of deploy/kubernetes/overlays/single.
const (
	DefaultMaxBytes    = 256 << 20
	DefaultMaxLogBytes = 256 << 20
)

// What an entry costs beside its key and value: its places in the indexes
// and the B+tree's own bookkeeping. Estimates, as the memory store's are.
const (
	entryOverhead    = 128
	logOverhead      = 256
	logEntryOverhead = 64
)

// Kinds of entry in writtenBucket and seqBucket.
const (
	kindRecord = 'r'
	kindVar    = 'v'
)

func kindBucket(tx *bbolt.Tx, kind byte) *bbolt.Bucket {
	if kind == kindRecord {
		return tx.Bucket(recordsBucket)
	}
	return tx.Bucket(varsBucket)
}

func entrySize(k, v []byte) int64 { return entryOverhead + int64(len(k)+len(v)) }

func u64(v []byte) uint64 {
	if len(v) < 8 {
		return 0
	}
	return binary.BigEndian.Uint64(v)
}

func getCount(tx *bbolt.Tx, key []byte) int64 { return int64(u64(tx.Bucket(boundsBucket).Get(key))) }

func addCount(tx *bbolt.Tx, key []byte, delta int64) error {
	if delta == 0 {
		return nil
	}
	return tx.Bucket(boundsBucket).Put(key, binary.BigEndian.AppendUint64(nil, uint64(getCount(tx, key)+delta)))
}

// putEntry writes value at key (a record or a variable), as the most
// recently written entry, then evicts the least recently written others
// while the records and variables hold more than max.
func putEntry(tx *bbolt.Tx, kind byte, key, value []byte, max int64) error {
	b := kindBucket(tx, kind)
	delta := entrySize(key, value)
	if old := b.Get(key); old != nil {
		delta -= entrySize(key, old)
	}
	if err := b.Put(key, value); err != nil {
		return err
	}
	id := append([]byte{kind}, key...)
	if err := unindex(tx, id); err != nil {
		return err
	}
	written := tx.Bucket(writtenBucket)
	n, err := written.NextSequence()
	if err != nil {
		return err
	}
	seq := binary.BigEndian.AppendUint64(nil, n)
	if err := written.Put(seq, id); err != nil {
		return err
	}
	if err := tx.Bucket(seqBucket).Put(id, seq); err != nil {
		return err
	}
	if err := addCount(tx, bytesKey, delta); err != nil {
		return err
	}
	for getCount(tx, bytesKey) > max {
		_, oldest := written.Cursor().First()
		if oldest == nil || bytes.Equal(oldest, id) {
			return nil // only the entry just written is left: it stays
		}
		if err := deleteEntry(tx, oldest[0], bytes.Clone(oldest[1:])); err != nil {
			return err
		}
	}
	return nil
}

// unindex removes the entry id (kind and key) from the write order.
func unindex(tx *bbolt.Tx, id []byte) error {
	seqs := tx.Bucket(seqBucket)
	seq := seqs.Get(id)
	if seq == nil {
		return nil
	}
	if err := tx.Bucket(writtenBucket).Delete(bytes.Clone(seq)); err != nil {
		return err
	}
	return seqs.Delete(id)
}

// deleteEntry deletes the record or variable at key, and its place in the
// write order even when it is missing (so that eviction always moves on).
func deleteEntry(tx *bbolt.Tx, kind byte, key []byte) error {
	if err := unindex(tx, append([]byte{kind}, key...)); err != nil {
		return err
	}
	b := kindBucket(tx, kind)
	old := b.Get(key)
	if old == nil {
		return nil
	}
	size := entrySize(key, old)
	if err := b.Delete(key); err != nil {
		return err
	}
	return addCount(tx, bytesKey, -size)
}

// logSize returns what the log name holds, and its place among the
// finished logs (nil while it runs).
func logSize(tx *bbolt.Tx, name []byte) (size int64, finished []byte) {
	v := tx.Bucket(logSizeBucket).Get(name)
	if len(v) < 8 {
		return 0, nil
	}
	if len(v) >= 16 {
		finished = bytes.Clone(v[8:16])
	}
	return int64(u64(v)), finished
}

func setLogSize(tx *bbolt.Tx, name []byte, size int64, finished []byte) error {
	v := binary.BigEndian.AppendUint64(make([]byte, 0, 16), uint64(size))
	return tx.Bucket(logSizeBucket).Put(name, append(v, finished...))
}

// growLog adds delta to what the log name holds.
func growLog(tx *bbolt.Tx, name []byte, delta int64) error {
	size, finished := logSize(tx, name)
	if err := setLogSize(tx, name, size+delta, finished); err != nil {
		return err
	}
	return addCount(tx, logBytesKey, delta)
}

// finishLog places the log name last among the finished logs.
func finishLog(tx *bbolt.Tx, name []byte) error {
	fin := tx.Bucket(finishedBucket)
	size, old := logSize(tx, name)
	if old != nil {
		if err := fin.Delete(old); err != nil {
			return err
		}
	}
	n, err := fin.NextSequence()
	if err != nil {
		return err
	}
	seq := binary.BigEndian.AppendUint64(nil, n)
	if err := fin.Put(seq, name); err != nil {
		return err
	}
	return setLogSize(tx, name, size, seq)
}

// dropLog deletes the log name, entries and all; dropping a missing one is
// no error.
func dropLog(tx *bbolt.Tx, name []byte) error {
	if tx.Bucket(logsBucket).Bucket(name) != nil {
		if err := tx.Bucket(logsBucket).DeleteBucket(name); err != nil {
			return err
		}
	}
	size, finished := logSize(tx, name)
	if finished != nil {
		if err := tx.Bucket(finishedBucket).Delete(finished); err != nil {
			return err
		}
	}
	if err := tx.Bucket(logSizeBucket).Delete(name); err != nil {
		return err
	}
	return addCount(tx, logBytesKey, -size)
}

// trimLogs drops the logs finished longest ago while the logs hold more
// than max. A running log is never dropped (its batch would lose its
// events; what running batches hold is bounded by the engine), nor the
// one finished last (its reader is likely reading it now). It returns
// how many it dropped.
func trimLogs(tx *bbolt.Tx, max int64) (n int64, err error) {
	fin := tx.Bucket(finishedBucket)
	for getCount(tx, logBytesKey) > max {
		c := fin.Cursor()
		first, name := c.First()
		last, _ := c.Last()
		if first == nil || bytes.Equal(first, last) {
			return n, nil
		}
		name = bytes.Clone(name)
		if err := fin.Delete(first); err != nil { // first, so that trimming always moves on
			return n, err
		}
		if err := dropLog(tx, name); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

// dropped is what checkBounds removed to bring a file within its bounds:
// one written under higher ones, or before there were any (a version
// without them, met when upgrading), may hold more than they allow.
type dropped struct {
	entries, entryBytes int64 // records and variables, least recently written first
	logs, logBytes      int64 // finished logs, finished longest ago first
}

// warnings says what d dropped from the file at path, for the operator:
// a retry of a dropped keyed call runs it again, and a dropped batch is
// NOT_FOUND, so it must not pass unseen (the first start of a version
// with bounds on a file that grew without them drops what is over them).
func (d dropped) warnings(path string, max, maxLog int64) []string {
	var w []string
	if d.entries > 0 {
		w = append(w, fmt.Sprintf("bolt store %s held more than max_bytes (%d): Open dropped %d idempotency records and session variables (%d bytes), the least recently written, so a retry of a dropped keyed call runs it again; raise max_bytes in the store's URL to keep more",
			path, max, d.entries, d.entryBytes))
	}
	if d.logs > 0 {
		w = append(w, fmt.Sprintf("bolt store %s held more than max_log_bytes (%d): Open dropped the logs of %d finished detached batches (%d bytes), those finished longest ago, which AttachBatch and GetBatch now answer NOT_FOUND; raise max_log_bytes in the store's URL to keep more",
			path, maxLog, d.logs, d.logBytes))
	}
	return w
}

// checkBounds makes sure the counts and indexes describe the file, and
// rebuilds them from a scan when they do not; then it applies the bounds,
// which may have been lowered since the file was written, and says what
// that dropped. It runs once, at Open: it reads every key, and every
// value's length.
func checkBounds(tx *bbolt.Tx, max, maxLog int64) (rebuilt bool, d dropped, err error) {
	for _, name := range [][]byte{boundsBucket, writtenBucket, seqBucket, logSizeBucket, finishedBucket} {
		if _, err := tx.CreateBucketIfNotExists(name); err != nil {
			return false, d, err
		}
	}
	ok, err := entriesCounted(tx)
	if err != nil {
		return false, d, err
	}
	if !ok {
		rebuilt = true
		if err := countEntries(tx); err != nil {
			return rebuilt, d, err
		}
	}
	ok, err = logsCounted(tx)
	if err != nil {
		return rebuilt, d, err
	}
	if !ok {
		rebuilt = true
		if err := countLogs(tx); err != nil {
			return rebuilt, d, err
		}
	}
	// Evict as a write would: the least recently written, down to one.
	written := tx.Bucket(writtenBucket)
	before := getCount(tx, bytesKey)
	for getCount(tx, bytesKey) > max {
		c := written.Cursor()
		first, oldest := c.First()
		last, _ := c.Last()
		if first == nil || bytes.Equal(first, last) {
			break
		}
		if err := deleteEntry(tx, oldest[0], bytes.Clone(oldest[1:])); err != nil {
			return rebuilt, d, err
		}
		d.entries++
	}
	d.entryBytes = before - getCount(tx, bytesKey)
	before = getCount(tx, logBytesKey)
	if d.logs, err = trimLogs(tx, maxLog); err != nil {
		return rebuilt, d, err
	}
	d.logBytes = before - getCount(tx, logBytesKey)
	return rebuilt, d, nil
}

// entriesCounted tells whether the records and variables are each in the
// write order once and their count is what they hold.
func entriesCounted(tx *bbolt.Tx) (bool, error) {
	if tx.Bucket(boundsBucket).Get(bytesKey) == nil {
		return false, nil
	}
	var total int64
	n, ok := 0, true
	for _, kind := range []byte{kindRecord, kindVar} {
		err := kindBucket(tx, kind).ForEach(func(k, v []byte) error {
			total += entrySize(k, v)
			n++
			if ok && tx.Bucket(seqBucket).Get(append([]byte{kind}, k...)) == nil {
				ok = false
			}
			return nil
		})
		if err != nil {
			return false, err
		}
	}
	return ok && total == getCount(tx, bytesKey) && tx.Bucket(seqBucket).Stats().KeyN == n && tx.Bucket(writtenBucket).Stats().KeyN == n, nil
}

// countEntries rebuilds the write order and the count of the records and
// variables. Their order is not known: they are placed by expiry, the
// soonest first.
func countEntries(tx *bbolt.Tx) error {
	if err := emptyBuckets(tx, writtenBucket, seqBucket); err != nil {
		return err
	}
	type entry struct {
		id      []byte
		expires int64
	}
	var all []entry
	var total int64
	for _, kind := range []byte{kindRecord, kindVar} {
		err := kindBucket(tx, kind).ForEach(func(k, v []byte) error {
			total += entrySize(k, v)
			e := entry{id: append([]byte{kind}, k...)}
			if kind == kindVar {
				e.expires = int64(u64(v))
			} else {
				var r record.Record
				if json.Unmarshal(v, &r) == nil {
					e.expires = r.Expires
				}
			}
			all = append(all, e)
			return nil
		})
		if err != nil {
			return err
		}
	}
	sort.SliceStable(all, func(i, j int) bool { return all[i].expires < all[j].expires })
	written, seqs := tx.Bucket(writtenBucket), tx.Bucket(seqBucket)
	for i, e := range all {
		seq := binary.BigEndian.AppendUint64(nil, uint64(i+1))
		if err := written.Put(seq, e.id); err != nil {
			return err
		}
		if err := seqs.Put(e.id, seq); err != nil {
			return err
		}
	}
	if err := written.SetSequence(uint64(len(all))); err != nil {
		return err
	}
	return tx.Bucket(boundsBucket).Put(bytesKey, binary.BigEndian.AppendUint64(nil, uint64(total)))
}

// scanLog returns what the log in b holds, as the counts count it.
func scanLog(name []byte, b *bbolt.Bucket) (int64, error) {
	size := logOverhead + int64(len(name))
	err := b.ForEach(func(k, v []byte) error {
		if len(k) == 8 {
			size += logEntryOverhead + int64(len(v))
		}
		return nil
	})
	return size, err
}

// logsCounted tells whether every log's size and the logs' count are what
// they hold, and every finished log is in the finish order.
func logsCounted(tx *bbolt.Tx) (bool, error) {
	if tx.Bucket(boundsBucket).Get(logBytesKey) == nil {
		return false, nil
	}
	logs := tx.Bucket(logsBucket)
	var total int64
	n, finished, ok := 0, 0, true
	err := logs.ForEachBucket(func(name []byte) error {
		b := logs.Bucket(name)
		size, err := scanLog(name, b)
		if err != nil {
			return err
		}
		total += size
		n++
		counted, fin := logSize(tx, name)
		var l record.Log
		done := json.Unmarshal(b.Get(metaKey), &l) == nil && l.Finished
		if done {
			finished++
		}
		if counted != size || done != (fin != nil) {
			ok = false
		}
		return nil
	})
	if err != nil {
		return false, err
	}
	return ok && total == getCount(tx, logBytesKey) && tx.Bucket(logSizeBucket).Stats().KeyN == n &&
		tx.Bucket(finishedBucket).Stats().KeyN == finished, nil
}

// countLogs rebuilds every log's size, the finish order (by expiry: the
// logs of one store share a TTL) and the logs' count.
func countLogs(tx *bbolt.Tx) error {
	if err := emptyBuckets(tx, logSizeBucket, finishedBucket); err != nil {
		return err
	}
	type fin struct {
		name    []byte
		expires int64
	}
	var done []fin
	var total int64
	logs := tx.Bucket(logsBucket)
	err := logs.ForEachBucket(func(name []byte) error {
		b := logs.Bucket(name)
		size, err := scanLog(name, b)
		if err != nil {
			return err
		}
		total += size
		var l record.Log
		if json.Unmarshal(b.Get(metaKey), &l) == nil && l.Finished {
			done = append(done, fin{bytes.Clone(name), l.Expires})
		}
		return setLogSize(tx, name, size, nil)
	})
	if err != nil {
		return err
	}
	if err := tx.Bucket(boundsBucket).Put(logBytesKey, binary.BigEndian.AppendUint64(nil, uint64(total))); err != nil {
		return err
	}
	sort.SliceStable(done, func(i, j int) bool { return done[i].expires < done[j].expires })
	for _, f := range done {
		if err := finishLog(tx, f.name); err != nil {
			return fmt.Errorf("log %q: %w", f.name, err)
		}
	}
	return nil
}

// emptyBuckets replaces the buckets named with empty ones.
func emptyBuckets(tx *bbolt.Tx, names ...[]byte) error {
	for _, name := range names {
		if err := tx.DeleteBucket(name); err != nil {
			return err
		}
		if _, err := tx.CreateBucket(name); err != nil {
			return err
		}
	}
	return nil
}
