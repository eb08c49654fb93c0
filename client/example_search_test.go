package client_test

import (
	"context"
	"fmt"
	"log"

	"github.com/toolwire/toolwire/client"
	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
)

// A runtime with a large catalog hands its model only the tools a step
// needs: it searches for them by what the step is about. Every word must
// occur in a tool's name, title, description or source; the best come
// first.
func ExampleClient_SearchTools() {
	addr, stop := startExampleServer()
	defer stop()
	c, err := client.New(addr)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	for _, q := range []string{"given", "given message", "wait"} {
		found, err := c.SearchTools(context.Background(), &toolwirev1.SearchToolsRequest{Query: q, MaxResults: 5})
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("%q: %d found:", q, found.GetTotalMatches())
		for _, t := range found.GetTools() {
			fmt.Printf(" %s", t.GetName())
		}
		fmt.Println()
	}
	// Output:
	// "given": 3 found: echo fail sleep
	// "given message": 1 found: fail
	// "wait": 1 found: sleep
}
