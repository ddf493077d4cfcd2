"""Authentication and authorisation of the controller's API: who a bearer token names (`tokens`),
what that role may call (`policy`), and the one place a request is checked (`server`)."""
