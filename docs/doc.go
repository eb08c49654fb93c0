// Package docs holds toolwire's documentation pages (the *.md files beside
// this one; README.md at the repository's root is the front door). It has no
// code: its tests keep the pages' links pointing at files and headings that
// exist.
package docs
