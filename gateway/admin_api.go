package gateway

import "net/http"

// registerAdminAPI mounts the JSON API and the web console.
func (g *Gateway) registerAdminAPI(mux *http.ServeMux) {}
