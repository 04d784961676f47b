"""kb.metadata: metadata that is not a JSON object gets one message, however it arrives."""

from __future__ import annotations

import pytest
from rest_framework.exceptions import ValidationError

from api.serializers import MetadataFilterField
from kb.metadata import NOT_A_JSON_OBJECT, MetadataRejected, metadata_problem, parse_metadata


@pytest.mark.parametrize("raw", ["not json", "[1, 2]", '"text"', "3"])
def test_upload_metadata_that_is_not_an_object_is_refused_with_the_one_message(raw):
    with pytest.raises(MetadataRejected) as err:
        parse_metadata(raw)
    assert str(err.value) == NOT_A_JSON_OBJECT


def test_stored_metadata_and_search_filters_use_the_same_message():
    assert metadata_problem(["a"]) == NOT_A_JSON_OBJECT
    assert metadata_problem({"a": "b"}) is None
    with pytest.raises(ValidationError) as err:
        MetadataFilterField().run_validation(["a"])
    assert err.value.detail == [NOT_A_JSON_OBJECT]
