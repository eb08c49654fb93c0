package runcommand

// SandboxNote is sandboxNote, for the tests' table of notes.
var SandboxNote = sandboxNote
