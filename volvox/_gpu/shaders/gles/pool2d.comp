#version 310 es
layout(local_size_x = 64, local_size_y = 1, local_size_z = 1) in;

struct _4
{
    uint _m0;
    uint _m1;
    uint _m2;
    uint _m3;
    uint _m4;
    uint _m5;
    uint _m6;
    uint _m7;
    uint _m8;
    uint _m9;
    uint _m10;
    uint _m11;
    uint _m12;
    uint _m13;
};

layout(binding = 0, std430) readonly buffer _9_8
{
    float _m0[];
} _8;

layout(binding = 1, std430) buffer _12_11
{
    float _m0[];
} _11;

layout(binding = 2, std430) readonly buffer _15_14
{
    _4 _m0;
} _14;

uint _17(uint _19, uint _20)
{
    return _19 % ((_20 == 0u) ? 1u : _20);
}

uint _28(uint _29, uint _30)
{
    return _29 / ((_30 == 0u) ? 1u : _30);
}

void main()
{
    float _59 = 0.0;
    float _61 = 0.0;
    uint _62 = 0u;
    uvec2 _126 = uvec2(4294967295u);
    uvec2 _170 = uvec2(4294967295u);
    uint _73 = (((gl_WorkGroupID.y * gl_NumWorkGroups.x) + gl_WorkGroupID.x) * 64u) + gl_LocalInvocationIndex;
    if (_73 >= _14._m0._m0)
    {
        return;
    }
    uint _83 = _17(_73, _14._m0._m3);
    uint _90 = _17(_28(_73, _14._m0._m3), _14._m0._m5);
    uint _100 = _17(_28(_73, _14._m0._m3 * _14._m0._m5), _14._m0._m4);
    uint _109 = _28(_73, (_14._m0._m3 * _14._m0._m5) * _14._m0._m4);
    if (_14._m0._m12 == 0u)
    {
        _59 = -3.3999999521443642490773241379936e+38;
    }
    for (;;)
    {
        if (all(equal(uvec2(0u), _126)))
        {
            break;
        }
        _126 -= uvec2(uint(_126.y == 0u), 1u);
        if (!(_62 < _14._m0._m6))
        {
            break;
        }
        uint _150 = _62;
        int _157 = int((_100 * _14._m0._m8) + _150) - int(_14._m0._m10);
        if ((_157 < 0) || (_157 >= int(_14._m0._m1)))
        {
            uint _241 = _62;
            _62 = _241 + 1u;
            continue;
        }
        uint _64 = 0u;
        for (;;)
        {
            if (all(equal(uvec2(0u), _170)))
            {
                break;
            }
            _170 -= uvec2(uint(_170.y == 0u), 1u);
            if (!(_64 < _14._m0._m7))
            {
                break;
            }
            uint _194 = _64;
            int _201 = int((_90 * _14._m0._m9) + _194) - int(_14._m0._m11);
            if ((_201 < 0) || (_201 >= int(_14._m0._m2)))
            {
                uint _239 = _64;
                _64 = _239 + 1u;
                continue;
            }
            uint _223 = (((((_109 * _14._m0._m1) + uint(_157)) * _14._m0._m2) + uint(_201)) * _14._m0._m3) + _83;
            if (_14._m0._m12 == 0u)
            {
                _59 = max(_59, _8._m0[_223]);
            }
            else
            {
                _59 += _8._m0[_223];
            }
            _61 += 1.0;
            uint _239 = _64;
            _64 = _239 + 1u;
            continue;
        }
        uint _241 = _62;
        _62 = _241 + 1u;
        continue;
    }
    if (_14._m0._m12 == 1u)
    {
        _59 /= _61;
    }
    if (_14._m0._m12 == 2u)
    {
        _59 /= float(_14._m0._m6 * _14._m0._m7);
    }
    if (_14._m0._m13 == 1u)
    {
        _59 = max(_59, 0.0);
    }
    if (_14._m0._m13 == 2u)
    {
        _59 = clamp(_59, 0.0, 6.0);
    }
    _11._m0[_73] = _59;
}

