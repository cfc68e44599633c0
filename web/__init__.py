"""The HTTP contract: errors and their one serializer, body schemas and their validation,
bearer-token authorization, middleware, pagination cursors and the OpenAPI document."""
