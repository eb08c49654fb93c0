package main

import (
	"os"
	"strings"
	"unsafe"
)

// hideArgs keeps serve's flags out of its command line as other processes
// read it (/proc/PID/cmdline, ps): a flag may name a store URL with a
// password, and every process on the machine, a sandboxed command among
// them, may read any process's command line. os.Args' strings are the
// kernel's argument area itself (the runtime copies nothing), so they are
// copied first, then the area past "toolwire serve" is zeroed; ps then
// shows "toolwire serve". Call it first thing in main, before anything
// keeps a string of os.Args.
func hideArgs() {
	args := make([]string, len(os.Args))
	for i, a := range os.Args {
		args[i] = strings.Clone(a)
	}
	orig := os.Args
	os.Args = args
	for _, a := range orig[min(2, len(orig)):] {
		if len(a) > 0 {
			clear(unsafe.Slice(unsafe.StringData(a), len(a)))
		}
	}
}
