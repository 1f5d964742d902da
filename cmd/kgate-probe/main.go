// Command kgate-probe is the container healthcheck: it GETs a URL (default the local /readyz) and
// exits 0 on HTTP 200, 1 otherwise. Distroless images have no curl or wget.
package main

import (
	"fmt"
	"net/http"
	"os"
	"time"
)

func main() {
	url := "http://127.0.0.1:8080/readyz"
	if len(os.Args) > 1 {
		url = os.Args[1]
	}
	client := http.Client{Timeout: 3 * time.Second}
	resp, err := client.Get(url)
	if err != nil {
		fmt.Fprintln(os.Stderr, "kgate-probe:", err)
		os.Exit(1)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		fmt.Fprintln(os.Stderr, "kgate-probe:", resp.Status)
		os.Exit(1)
	}
}
