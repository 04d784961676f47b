"""REST API: views, serializers, authentication, throttling, OpenAPI. Nothing imports api."""
