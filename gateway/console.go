package gateway

import (
	"embed"
	"io/fs"
	"net/http"
)

// The web console is plain HTML and JavaScript embedded in the binary: no CDN, no build step.
//
//go:embed console
var consoleFS embed.FS

func consoleHandler() http.Handler {
	sub, err := fs.Sub(consoleFS, "console")
	if err != nil {
		panic(err) // the embedded tree is fixed at build time
	}
	return http.FileServer(http.FS(sub))
}
